from rlexp.algo.algorithm import Algorithm

# CISPO (MiniMax-M1, arXiv:2506.13585): the IS weight clipped and stop-gradient.
ALGORITHM = Algorithm(name="cispo", reference="arXiv:2506.13585")
