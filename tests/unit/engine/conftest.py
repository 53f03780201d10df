from hami.engine.model import DeviceInfo

LAB_UUIDS = (
    "GPU-77b9c63c-e3cb-8207-c355-5f65d684d2d8",
    "GPU-f147e096-f059-d618-77b4-890c70ef7468",
    "GPU-66116373-061e-a66b-28a3-c60c4877e16e",
    "GPU-3c5f3637-e911-b226-7a4c-52da87c38aff",
)


def t4(uuid: str, index: int, numa: int = 0, **kw: object) -> DeviceInfo:
    return DeviceInfo(uuid, index, 10, 15360, 100, "NVIDIA-Tesla T4", numa, **kw)  # type: ignore[arg-type]
