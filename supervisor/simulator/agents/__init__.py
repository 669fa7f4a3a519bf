"""The client agents: nodes and the tasks they run, exec sessions in the tasks' containers, and each
agent's own HTTP port."""
