"""Nomad's jobspec in the simulated cluster: HCL2's native syntax read into a tree, and the tree
decoded into the ``api.Job`` that ``POST /v1/jobs/parse`` answers, as Nomad 1.10.5's ``jobspec2``
decodes it."""
