"""`python -m app`. The guard matters: vLLM spawns its EngineCore by re-importing __main__."""

if __name__ == "__main__":
    import sys

    from app.commands.cli import main

    sys.exit(main())
