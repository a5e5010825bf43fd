"""The head (one per cluster): the control store and its shell, cluster metrics and their history, persistence, task events, and the dashboard process it starts."""
