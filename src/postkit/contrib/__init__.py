"""Integrations of Postkit with the frameworks applications run on (``postkit.contrib.django``)."""
