"""`ray.util.client`: only what libraries import from it (`common.ClientObjectRef`); Ray Client
itself is `raylite.init("ray://HOST:10001")`."""
