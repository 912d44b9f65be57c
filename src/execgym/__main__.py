"""``python -m execgym`` runs the command line."""

from execgym.cli import main

main()
