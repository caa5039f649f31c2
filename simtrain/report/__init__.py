"""simtrain.report"""
