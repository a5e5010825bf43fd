"""Runtime environments: pip/uv environments, working_dir and py_modules packaging, and the checks on what a runtime_env asks for."""
