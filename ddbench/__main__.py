"""`python -m ddbench`: the CLI where the console script is not installed (e.g. a checkout on a GPU box)."""

from ddbench.cli import main

main()
