"""The Ray Client (`ray://`): the head's listener, the per-connection proxy driver it starts, and the remote client a laptop's program uses in place of a CoreClient."""
