"""What a step costs: the model and GPU catalog, step-cost profiles (roofline, fitted, imported)
and the cost model that prices a planned step."""
