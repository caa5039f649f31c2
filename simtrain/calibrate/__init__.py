"""simtrain.calibrate"""
