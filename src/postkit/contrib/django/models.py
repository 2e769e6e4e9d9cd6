"""No models: the queue's tables are the SQL module's. This module exists because Django sends
``post_migrate`` (the schema's upgrade, see ``apps.py``) only to apps with a models module."""
