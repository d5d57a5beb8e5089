"""`autopar serve`: the CLI's commands over HTTP (FastAPI, the optional `serve` extra).

One declaration of every input: an endpoint's request body is the command's own options, read from the command
line's declaration (cli/options.py through typer), so a field's description is its `--help`, and the service
answers what the CLI answers for the same input (it runs the same command, in a worker process, and returns
its --json document). Modules:

- `commands`: the request schema of each command (from its options) and the body -> argv -> JSON run.
- `jobs`: long commands (optimize, whatif) as jobs: an id, their state, their answer or why they failed.
- `api`: the FastAPI application: endpoints, the advisor aliases, the write token, size and job limits.
"""
