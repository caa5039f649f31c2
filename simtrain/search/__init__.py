"""simtrain.search"""
