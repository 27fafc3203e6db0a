"""How instances are wired: a single instance, a routed colocated cluster, or prefill and decode
pools joined by a KV link; and the routers that pick an instance."""
