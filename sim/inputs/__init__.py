"""What every user file goes through before batchsim believes it: text decoding with a located
error (`text`), a strict YAML loader (`strict_yaml`) and the strict pydantic base of every
schema (`strict_model`). Nothing here knows what a scenario is."""
