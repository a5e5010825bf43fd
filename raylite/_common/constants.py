"""`ray._common.constants`: the names of Ray's built-in resources and variables that user code and
Ray's own tests import (`HEAD_NODE_RESOURCE_NAME` is the resource only the head node has, so a
task can be pinned there with `resources={HEAD_NODE_RESOURCE_NAME: 0.001}`)."""

HEAD_NODE_RESOURCE_NAME = "node:__internal_head__"
NODE_ID_PREFIX = "node:"  # a node's own resource is "node:<ip>"
RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR = "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC"

__all__ = ["HEAD_NODE_RESOURCE_NAME", "NODE_ID_PREFIX", "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR"]
