"""The simulation core: request state, the scheduler -> engine contract, the KV pool and the
engine that applies plans, records what happened and keeps time with SimPy.

Nothing here knows a batching policy, a scenario file or a cluster: policies implement the
contract in `sim.core.plan`, and `sim.topology` wires instances together.
"""
