"""The interface and address gloo/NCCL/vLLM are told to use, derived from a node's cluster IP
(raylite/util/_net.py): the libraries' own guess resolves the host name, which fails in
containers and on the network-namespace hosts."""

from __future__ import annotations

from raylite.util._net import IFNAME_VARIABLES, collective_env, interface_for_ip


def test_loopback_addresses_are_held_by_the_loopback_interface():
    assert interface_for_ip("127.0.0.1") == "lo"
    assert interface_for_ip("127.0.0.5") == "lo"  # the whole 127/8 is routed to it


def test_an_address_no_interface_holds_names_none():
    assert interface_for_ip("203.0.113.77") is None
    assert interface_for_ip("not-an-ip") is None
    assert interface_for_ip("") is None


def test_collective_env_names_the_interface_and_vllm_host_ip():
    env = collective_env("127.0.0.1", environ={})
    assert {var: env[var] for var in IFNAME_VARIABLES} == {var: "lo" for var in IFNAME_VARIABLES}
    assert env["VLLM_HOST_IP"] == "127.0.0.1"


def test_collective_env_keeps_what_the_user_set():
    env = collective_env("127.0.0.1", environ={"GLOO_SOCKET_IFNAME": "eth7", "VLLM_HOST_IP": "10.0.0.9"})
    assert "GLOO_SOCKET_IFNAME" not in env and "VLLM_HOST_IP" not in env
    assert env["NCCL_SOCKET_IFNAME"] == "lo"


def test_an_unknown_address_names_no_interface_but_still_the_host_ip():
    assert collective_env("203.0.113.77", environ={}) == {"VLLM_HOST_IP": "203.0.113.77"}
