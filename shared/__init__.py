"""What the server's rooms share and the SDK does not need: the Arrow layout of the tables ingest writes
(``columns``, so decode workers build batches without the store), YAML config files checked field by field
(``yamlfile``), what budgets and alert rules judge (``measures``), child processes tied to their parent
(``processes``), and the server's garbage-collector settings (``gc_tuning``). Nothing here is imported by
``import agentlat``; each module is imported by name."""
