"""``python -m agentpool`` is the same as the ``agentpool`` console script."""

from agentpool.cli import main

if __name__ == "__main__":
    main()
