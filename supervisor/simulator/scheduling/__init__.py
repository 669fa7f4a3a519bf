"""The leader's scheduler: job registration (canonicalized and validated), evaluations, placement
on feasible nodes, and blocked evaluations."""
