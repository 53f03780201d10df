"""IEEE single precision, as HAMi computes scores (Go float32).

Scores are compared and printed (`%f`), so rounding every intermediate result
to float32 is what makes `1.651042` come out exactly as HAMi logs it.
"""

import struct

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """Round a double to the nearest float32."""
    return float(_F32.unpack(_F32.pack(x))[0])
