"""MetaX: the exclusive GPU and the shared sGPU, HAMi's two MetaX device types."""

from hami.engine.families.metax.config import MetaxConfig
from hami.engine.families.metax.gpu import MetaxGpu
from hami.engine.families.metax.sgpu import MetaxSgpu

__all__ = ["MetaxConfig", "MetaxGpu", "MetaxSgpu"]
