"""The daemon's supervision tree: restart policy and shutdown as data, the tree itself, and the
election of the active daemon."""
