"""Many workspaces' agents in one deployment: which agent answers a record, and its code.

``routing`` reads the record's agent and workspace, builds the stored agent version from the
registry (``store.hosting``) and keeps it cached, and reads the workspace's plan; ``packs``
loads the code packs (``PACKS``) that stored agents name. The registry commands are
``turnflow agents`` (``consumer.cli.agents``).
"""
