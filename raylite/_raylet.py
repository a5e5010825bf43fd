"""`ray._raylet`: the names Ray's own documentation imports from it (`from ray._raylet import
ObjectRefGenerator`), so such programs run unchanged, and the keys of the labels Ray gives every
node (`label_selector={ray._raylet.RAY_NODE_ID_KEY: node_id}` pins a task to one node). Everything
else of Ray's private module has no counterpart here."""

from raylite._core.client.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator
from raylite._core.labels import NODE_ID_LABEL

StreamingObjectRefGenerator = ObjectRefGenerator  # its name in Ray before 2.9

# Ray's built-in node label keys; raylite sets RAY_NODE_ID_KEY on every node, the others are
# set by whoever starts the node (`raylite start --labels`, KubeRay) as in Ray.
RAY_NODE_ID_KEY = NODE_ID_LABEL
RAY_NODE_ACCELERATOR_TYPE_KEY = "ray.io/accelerator-type"
RAY_NODE_GROUP_KEY = "ray.io/node-group"
RAY_NODE_MARKET_TYPE_KEY = "ray.io/market-type"
RAY_NODE_REGION_KEY = "ray.io/availability-region"
RAY_NODE_ZONE_KEY = "ray.io/availability-zone"
RAY_NODE_TPU_POD_TYPE_KEY = "ray.io/tpu-pod-type"
RAY_NODE_TPU_SLICE_NAME_KEY = "ray.io/tpu-slice-name"
RAY_NODE_TPU_TOPOLOGY_KEY = "ray.io/tpu-topology"
RAY_NODE_TPU_WORKER_ID_KEY = "ray.io/tpu-worker-id"

__all__ = ["DynamicObjectRefGenerator", "ObjectRef", "ObjectRefGenerator", "RAY_NODE_ACCELERATOR_TYPE_KEY",
           "RAY_NODE_GROUP_KEY", "RAY_NODE_ID_KEY", "RAY_NODE_MARKET_TYPE_KEY", "RAY_NODE_REGION_KEY",
           "RAY_NODE_TPU_POD_TYPE_KEY", "RAY_NODE_TPU_SLICE_NAME_KEY", "RAY_NODE_TPU_TOPOLOGY_KEY",
           "RAY_NODE_TPU_WORKER_ID_KEY", "RAY_NODE_ZONE_KEY", "StreamingObjectRefGenerator"]
