"""(ops to be added)"""
