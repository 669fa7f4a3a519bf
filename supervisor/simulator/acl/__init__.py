"""Nomad's ACL system and Variables: which request needs which capability, the tokens holding them,
and the Variables store with its locks and routes."""
