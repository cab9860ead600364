from rlexp.algo.algorithm import Algorithm

# MiniMax-M1 (MiniMax 2025, arXiv:2506.13585): the IS weight is clipped and stop-gradient,
# so clipped tokens keep their policy gradient (algo.loss: cispo; conf/algo/cispo.yaml).
ALGORITHM = Algorithm(name="cispo", reference="arXiv:2506.13585")
