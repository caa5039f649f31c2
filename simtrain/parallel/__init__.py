"""simtrain.parallel"""
