"""``prepare_dataset_shard``: a tf.data.Dataset made from this rank's shard, ready to train on."""

from __future__ import annotations

from typing import Any


def prepare_dataset_shard(tf_dataset_shard: Any) -> Any:
    """Turn off tf.distribute's auto-sharding (the shard is this rank's rows already: sharding
    again would drop data) and prefetch with autotune."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf_dataset_shard.with_options(options).prefetch(tf.data.AUTOTUNE)
