"""agentlat.alerts: alert rules, their evaluator and notifiers. Reads the store only."""
