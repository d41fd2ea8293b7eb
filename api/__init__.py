"""agentlat.api: the query API's contract as code: its time parameters (``windows``) and its client.

A leaf: nothing here imports the server, the store or the dashboard. The server answers in
this contract; the dashboard and the CLI read through ``client``.
"""
