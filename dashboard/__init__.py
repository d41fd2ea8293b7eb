"""agentlat.dashboard: the Streamlit dashboard. A client of the query API only."""
