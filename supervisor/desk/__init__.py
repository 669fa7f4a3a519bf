"""What the API asks of runners: claims, releases, file operations and executions, behind the admission
gate; and the wiring of one term's parts."""
