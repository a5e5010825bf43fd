"""Starting and joining clusters: the driver's init(), the daemon process that hosts head and node components, launching children, session directories and cluster files."""
