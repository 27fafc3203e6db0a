"""Questions asked of many runs: parameter sweeps, capacity searches and the CI regression of
policy metrics against committed baselines."""
