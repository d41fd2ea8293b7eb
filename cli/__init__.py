"""agentlat.cli: every ``agentlat`` command (typer). The top of the layering: nothing imports it."""
