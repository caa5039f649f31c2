"""simtrain.sim"""
