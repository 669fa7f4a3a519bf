"""The simulated cluster's replicated state: its records, their JSON as Nomad writes it, the tables
and the Raft index, and the events each write publishes to a server's broker."""
