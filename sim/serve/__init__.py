"""`batchsim serve`: the simulated engine behind a live OpenAI-compatible endpoint."""
