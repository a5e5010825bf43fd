"""Which accelerators a node has, named the way Ray names them (`accelerator_type:A100`).

A node advertises one resource `accelerator_type:<TYPE>` (amount 1) per type name its
accelerators answer to, next to its `GPU` count; a task, actor, Train worker or Serve replica
that passes `accelerator_type="A100"` asks for 0.001 of that resource, so it lands only on such
a node and a type no node has is reported infeasible at once, like any impossible request.

The probes are split from the parsing so that tests feed recorded answers: `probe()` asks
NVML (the `nvidia-ml-py` package, imported only where it is installed) and falls back to
`nvidia-smi`; `gpu_type_names()` turns a device's marketing name into Ray's type names. Both
run only on a node that has GPUs (or an `nvidia-smi`), so a CPU node's start costs nothing.

Naming, as Ray's constants (`raylite.util.accelerators`) spell them:
- "NVIDIA A100-SXM4-80GB" -> A100 and A100-80G (an A100 also answers to its memory size);
- "NVIDIA H100 80GB HBM3" -> H100; "Tesla V100-SXM2-16GB" -> V100; "NVIDIA L40S" -> L40S;
- "NVIDIA RTX PRO 6000 Blackwell ..." -> RTX-PRO-6000; "NVIDIA GeForce RTX 4090" -> RTX-4090;
- Google TPU pods say their type in TPU_ACCELERATOR_TYPE ("v5litepod-8" -> TPU-V5LITEPOD).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

RESOURCE_PREFIX = "accelerator_type:"
# the accelerators besides GPUs whose devices are handed out one by one (node/gpu_ids.py), and the
# variable that tells a process which of them it may use (Ray's names for both)
OTHER_DEVICE_ENV = {"neuron_cores": "NEURON_RT_VISIBLE_CORES", "TPU": "TPU_VISIBLE_CHIPS",
                    "NPU": "ASCEND_RT_VISIBLE_DEVICES", "HPU": "HABANA_VISIBLE_MODULES", "RBLN": "RBLN_DEVICES"}
# what a task asks for when it names a type: a token amount, so any number of them fit a node
REQUEST_AMOUNT = 0.001

_VENDOR_WORDS = {"NVIDIA", "TESLA", "GEFORCE", "QUADRO"}
_SIZE = re.compile(r"^(\d+)\s*G(B)?$", re.IGNORECASE)
_NOT_MODEL = re.compile(r"^(\d+GB?|HBM\d*E?|PCIE|SXM\d*|NVL|BLACKWELL|HOPPER|ADA|GENERATION|EDITION|SERVER|"
                        r"WORKSTATION|MAX-Q|MAX|GPU)$", re.IGNORECASE)


@dataclass(frozen=True)
class GpuDevice:
    """One device as a probe reports it: its marketing name and memory (MiB, 0 if unknown)."""

    name: str
    memory_mib: int = 0


@dataclass(frozen=True)
class NodeAccelerators:
    """What a node's probe found: how many GPUs and which type names they answer to."""

    gpu_count: int = 0
    type_names: tuple[str, ...] = ()
    source: str = ""  # "nvml", "nvidia-smi", "env" or "" (nothing found)
    devices: tuple[GpuDevice, ...] = field(default=())


def gpu_type_names(name: str, memory_mib: int = 0) -> list[str]:
    """Ray's type names for one GPU's marketing name (empty when the name says nothing)."""
    words = [w for w in re.split(r"\s+", name.strip()) if w]
    while words and words[0].upper() in _VENDOR_WORDS:
        words.pop(0)
    if not words:
        return []
    first = words[0]
    if first.upper() == "RTX":  # "RTX PRO 6000 Blackwell", "RTX 4090", "RTX A6000"
        model = [w for w in words if not _NOT_MODEL.match(w)]
        return ["-".join(w.upper() for w in model)]
    base = first.split("-")[0].upper()
    if not re.search(r"\d", base):
        return []
    names = [base]
    if base == "A100":
        size = _size_gb(name, memory_mib)
        if size:
            names.append(f"A100-{40 if size <= 40 else 80}G")
    return names


def _size_gb(name: str, memory_mib: int) -> int:
    for part in re.split(r"[\s\-]+", name):
        m = _SIZE.match(part)
        if m:
            return int(m.group(1))
    return round(memory_mib / 1024) if memory_mib else 0


def tpu_type_names(env: Mapping[str, str]) -> list[str]:
    """TPU_ACCELERATOR_TYPE as GKE and Cloud TPU VMs set it ("v4-16", "v5litepod-8")."""
    raw = env.get("TPU_ACCELERATOR_TYPE", "").strip()
    if not raw:
        return []
    generation = raw.split("-")[0].upper()
    return [f"TPU-{generation}"] if generation.startswith("V") else []


def parse_nvidia_smi(text: str) -> list[GpuDevice]:
    """Rows of `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`."""
    devices = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, memory = line.rpartition(",")
        if not name:  # a row without the memory column
            name, memory = memory, ""
        mem = int(float(memory)) if memory.strip().replace(".", "", 1).isdigit() else 0
        devices.append(GpuDevice(name.strip(), mem))
    return devices


Runner = Callable[[list[str]], str]


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout


def _nvml_devices() -> list[GpuDevice] | None:
    """The devices as NVML reports them; None where nvidia-ml-py or the driver is missing."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001  no driver: NVMLError_LibraryNotFound and friends
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):
                name = name.decode()
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            out.append(GpuDevice(name, int(memory)))
        return out
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def probe(*, nvml: Callable[[], list[GpuDevice] | None] = _nvml_devices, run: Runner = _run,
          which: Callable[[str], str | None] = shutil.which,
          env: Mapping[str, str] | None = None) -> NodeAccelerators:
    """Ask the machine which accelerators it has: NVML, then nvidia-smi, then TPU env vars."""
    env = os.environ if env is None else env
    devices = nvml()
    source = "nvml"
    if not devices and which("nvidia-smi"):
        source = "nvidia-smi"
        try:
            devices = parse_nvidia_smi(run(["nvidia-smi", "--query-gpu=name,memory.total",
                                            "--format=csv,noheader,nounits"]))
        except (OSError, subprocess.SubprocessError, ValueError):
            devices = []
    if devices:
        return NodeAccelerators(len(devices), tuple(gpu_type_names(devices[0].name, devices[0].memory_mib)),
                                source, tuple(devices))
    tpu = tpu_type_names(env)
    return NodeAccelerators(0, tuple(tpu), "env" if tpu else "")


def node_type_resources(type_names: list[str] | tuple[str, ...]) -> dict[str, float]:
    """The resources a node with these type names advertises."""
    return {RESOURCE_PREFIX + name: 1.0 for name in type_names}


def request_resources(accelerator_type: str, where: str) -> dict[str, float]:
    """What `accelerator_type=...` on a task, actor or trainer asks for."""
    if not isinstance(accelerator_type, str) or not accelerator_type.strip():
        raise ValueError(f"accelerator_type of {where} must be a type name such as 'A100' or 'H100' "
                         f"(raylite.util.accelerators lists them), got {accelerator_type!r}.")
    return {RESOURCE_PREFIX + accelerator_type.strip(): REQUEST_AMOUNT}


ACCELERATOR_LABEL = "ray.io/accelerator-type"


def label_resources(labels: Mapping[str, str] | None) -> dict[str, float]:
    """KubeRay's spelling, `--labels=ray.io/accelerator-type=A100`, as the resource Ray's is."""
    name = (labels or {}).get(ACCELERATOR_LABEL, "").strip()
    return node_type_resources([name]) if name else {}
