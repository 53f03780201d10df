"""The NVIDIA family answers as NVIDIA's engine does: its fit (HAMi's walk, on cards in HAMi's
order) picks what hami.engine.fit's fast path picks, with the same reason when nothing fits,
on hami-core, MPS and MIG cards under every card policy; its decode, request reading and
annotations are the engine's."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.engine import nvidianames as nv
from hami.engine.codec import decode_node_devices, encode_node_devices
from hami.engine.families.base import FamilyRequest, FitPod
from hami.engine.families.nvidia.family import FAMILY
from hami.engine.fit import first_order, fit_container, resorted
from hami.engine.model import PERCENTAGE_UNSET, Card, ContainerRequest, DeviceInfo, Usage
from hami.engine.policy import pod_options
from hami.engine.requests import ResourceDefaults, container_request
from hami.engine.score import make_card
from tests.builders import FAMILIES
from tests.reference.geometries import A100_40GB, A100_40GB_MEMORY, engine_profiles
from tests.unit.engine.families.kit import ctr

POLICIES = ("spread", "binpack", "mutex", "numa", "binpack,numa", "mutex,spread")
MIG = engine_profiles(A100_40GB)


@st.composite
def cards(draw: st.DrawFn) -> list[Card]:
    out = []
    for i in range(draw(st.integers(1, 5))):
        mode = draw(st.sampled_from(("hami-core", "hami-core", "mps", "mig")))
        mig = mode == "mig"
        info = DeviceInfo(
            f"GPU-{i}",
            i,
            draw(st.sampled_from((1, 4, 10))),
            A100_40GB_MEMORY if mig else draw(st.sampled_from((15360, 24576))),
            100,
            draw(st.sampled_from(("NVIDIA-Tesla T4", "NVIDIA-A100"))),
            numa=draw(st.integers(0, 1)),
            mode=mode,
            health=draw(st.integers(0, 9)) > 0,
            mig_profiles=MIG if mig else (),
        )
        used = 0 if mig else draw(st.integers(0, 3))
        usage = Usage(used, used * draw(st.sampled_from((0, 1000, 8000))), used * 10)
        out.append(make_card(info, usage))
    return out


requests = st.builds(
    ContainerRequest,
    st.integers(1, 4),
    st.sampled_from((0, 1000, 4000, 12000)),
    st.sampled_from((PERCENTAGE_UNSET, 50, 100)),
    st.sampled_from((0, 20, 100)),
)


@settings(max_examples=300, deadline=None)
@given(
    cards(),
    requests,
    st.sampled_from(POLICIES),
    st.sampled_from(({}, {nv.NUMA_BIND: "true"}, {nv.USE_GPUTYPE: "T4"}, {nv.VGPU_MODE: "mig"})),
)
def test_the_fit_is_the_engines(
    cards: list[Card], req: ContainerRequest, policy: str, selectors: dict[str, str]
) -> None:
    opts = pod_options({"hami.io/gpu-scheduler-policy": policy, **selectors})
    want = fit_container(cards, req, opts, frozenset())
    ordered = [cards[i] for i in resorted(cards, first_order(cards), opts)]
    ask = FamilyRequest(nv.NVIDIA, req.nums, req.memreq, req.mem_percentage, req.coresreq)
    got = FAMILY.fit(ordered, ask, FitPod(selectors, opts.gpu_policy.card_filters), ())
    assert (got.devices, got.reason) == (want.devices, want.reason)


def test_decode_and_requests_are_the_engines() -> None:
    infos = (DeviceInfo("GPU-0", 0, 10, 15360, 100, "NVIDIA-Tesla T4"),)
    raw = encode_node_devices(infos)
    assert FAMILY.decode_node({nv.NODE_REGISTER: raw}) == decode_node_devices(raw) == infos
    assert FAMILY.decode_node({}) is None
    for limits in ({nv.GPU: 2, nv.GPUMEM: "3000"}, {nv.GPUMEM_PERCENTAGE: 50}, {"cpu": 1}):
        want = container_request(ctr(limits), ResourceDefaults())
        got = FAMILY.container_request(ctr(limits))
        assert (want is None and got is None) or (
            want is not None
            and got
            == FamilyRequest(nv.NVIDIA, want.nums, want.memreq, want.mem_percentage, want.coresreq)
        )


def test_the_registry_holds_thirteen_families_in_hamis_order() -> None:
    # HAMi's InitDevicesWithConfig: NVIDIA, Cambricon, Hygon, Enflame (GCU, then its vGCU),
    # Moore Threads, MetaX (GPU, then sGPU), Kunlunxin (XPU, then vXPU), AWS Neuron, AMD,
    # Vastai, Biren, then each Ascend and each Iluvatar chip of the chart's device config.
    # Thirteen vendors; some register several kinds (a chip each, or whole and shared cards).
    assert FAMILIES.members[0] is FAMILY
    assert [f.wire.type for f in FAMILIES.members] == [
        "NVIDIA", "MLU", "DCU", "GCU", "Enflame", "Mthreads", "Metax-GPU", "Metax-SGPU",
        "kunlun", "XPU", "AWSNeuron", "AMD", "Vastai", "Biren",
        "Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4", "Ascend310P",
        "Ascend910C", "MR-V100", "MR-V50", "BI-V150", "BI-V100",
    ]  # fmt: skip
    assert FAMILIES.others == FAMILIES.members[1:]
    assert nv.NVIDIA not in FAMILIES.other_types()
    assert not set(FAMILY.wire.resources.all()) & set(FAMILIES.other_resource_names())
