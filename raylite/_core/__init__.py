"""raylite's Core runtime: ids, protocol, transport, object store, the process roles."""
