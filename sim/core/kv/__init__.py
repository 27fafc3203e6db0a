"""The KV pool component: GPU blocks and their prefix cache (`pool`), the tiers below the GPU
(`tiers`), host swap space (`host`) and the planning mirror of releases (`planning`). The engine
owns one `KVPool` per instance; policies see it only through `sim.core.plan.KVView`."""
