"""Reading the model: the residual stream's layout, exact decompositions, interventions, attention scores,
a cache against its model, reference levels, nnsight / circuitsvis and sparse autoencoders.
"""
