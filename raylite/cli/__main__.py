"""`python -m raylite.cli` == the `raylite` command."""

from raylite.cli import main

main()
