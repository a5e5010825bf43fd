"""Accelerator type detection, fed recorded NVML and nvidia-smi answers (no GPU needed)."""

from __future__ import annotations

import subprocess

import pytest

from raylite._core import accelerators as A
from raylite._core.options import TASK_OPTIONS, resource_request, validate

# what `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` printed on
# machines with these cards
SMI_A100_80 = "NVIDIA A100-SXM4-80GB, 81920\nNVIDIA A100-SXM4-80GB, 81920\n"
SMI_H100 = "NVIDIA H100 80GB HBM3, 81559\n"


@pytest.mark.parametrize("name, memory, expected", [
    ("NVIDIA A100-SXM4-80GB", 81920, ["A100", "A100-80G"]),
    ("NVIDIA A100-SXM4-40GB", 40960, ["A100", "A100-40G"]),
    ("NVIDIA A100 80GB PCIe", 0, ["A100", "A100-80G"]),
    ("NVIDIA A100-PCIE", 40536, ["A100", "A100-40G"]),  # the size from the memory alone
    ("NVIDIA H100 80GB HBM3", 81559, ["H100"]),
    ("NVIDIA H200", 143771, ["H200"]),
    ("Tesla V100-SXM2-16GB", 16160, ["V100"]),
    ("Tesla T4", 15360, ["T4"]),
    ("NVIDIA A10G", 23028, ["A10G"]),
    ("NVIDIA L4", 23034, ["L4"]),
    ("NVIDIA L40S", 46068, ["L40S"]),
    ("NVIDIA B200", 183359, ["B200"]),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, ["RTX-PRO-6000"]),
    ("NVIDIA GeForce RTX 4090", 24564, ["RTX-4090"]),
    ("NVIDIA", 0, []),
    ("", 0, []),
])
def test_marketing_names_become_rays_type_names(name, memory, expected):
    assert A.gpu_type_names(name, memory) == expected


def test_nvidia_smi_rows_are_parsed():
    assert A.parse_nvidia_smi(SMI_A100_80) == [A.GpuDevice("NVIDIA A100-SXM4-80GB", 81920)] * 2
    assert A.parse_nvidia_smi("Tesla T4\n") == [A.GpuDevice("Tesla T4", 0)]
    assert A.parse_nvidia_smi("\n") == []


def test_probe_prefers_nvml_and_falls_back_to_nvidia_smi():
    calls = []

    def run(cmd):
        calls.append(cmd)
        return SMI_H100

    via_nvml = A.probe(nvml=lambda: [A.GpuDevice("NVIDIA A100-SXM4-40GB", 40960)], run=run,
                       which=lambda _: "/usr/bin/nvidia-smi", env={})
    assert (via_nvml.gpu_count, via_nvml.type_names, via_nvml.source) == (1, ("A100", "A100-40G"), "nvml")
    assert calls == []  # NVML answered: no process started

    via_smi = A.probe(nvml=lambda: None, run=run, which=lambda _: "/usr/bin/nvidia-smi", env={})
    assert (via_smi.gpu_count, via_smi.type_names, via_smi.source) == (1, ("H100",), "nvidia-smi")
    assert calls[0][0] == "nvidia-smi"


def test_probe_on_a_machine_without_accelerators_finds_nothing_and_runs_nothing():
    def run(cmd):
        raise AssertionError("nvidia-smi must not run where it does not exist")

    found = A.probe(nvml=lambda: None, run=run, which=lambda _: None, env={})
    assert found == A.NodeAccelerators()


def test_a_failing_nvidia_smi_is_no_accelerator_not_a_crash():
    def run(cmd):
        raise subprocess.CalledProcessError(9, cmd, "", "NVIDIA-SMI has failed because it couldn't "
                                                        "communicate with the NVIDIA driver")

    found = A.probe(nvml=lambda: None, run=run, which=lambda _: "/usr/bin/nvidia-smi", env={})
    assert found.gpu_count == 0 and found.type_names == ()


def test_tpu_hosts_say_their_type_in_the_environment():
    assert A.probe(nvml=lambda: None, which=lambda _: None,
                   env={"TPU_ACCELERATOR_TYPE": "v5litepod-8"}).type_names == ("TPU-V5LITEPOD",)
    assert A.tpu_type_names({"TPU_ACCELERATOR_TYPE": "v4-16"}) == ["TPU-V4"]
    assert A.tpu_type_names({}) == []


def test_accelerator_type_option_becomes_a_resource_request():
    req = resource_request({"accelerator_type": "A100", "num_gpus": 1}, default_cpus=1)
    assert set(req) == {"CPU", "GPU", "accelerator_type:A100"}
    assert 0 < req["accelerator_type:A100"] < req["GPU"]


@pytest.mark.parametrize("bad", ["", "  "])
def test_a_malformed_accelerator_type_is_refused_at_decoration(bad):
    with pytest.raises(ValueError, match="accelerator_type of f must be a type name"):
        validate({"accelerator_type": bad}, TASK_OPTIONS, "f")


def test_an_accelerator_type_that_is_not_a_string_is_a_type_error_as_in_ray():
    with pytest.raises(TypeError, match="The type of keyword 'accelerator_type'"):
        validate({"accelerator_type": 100}, TASK_OPTIONS, "f")
