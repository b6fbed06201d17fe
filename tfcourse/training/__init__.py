"""Training: one loop for every model, the GPT recipes, and the two end-to-end runs.

    loop.py         train(): AdamW, warm-up + cosine, clipping (clip_gradients), mixed precision, evaluation,
                    checkpoints (a path or a file object) with exact resume
    recipes.py      the GPU and CPU recipes of lesson 08 (model size, batch, steps, learning rate)
    shakespeare.py  python -m tfcourse.training.shakespeare: train a recipe on Tiny Shakespeare
    translation.py  lesson 09's English→French pipeline: vocabularies, shifted targets, train, score
"""

from .loop import TrainConfig, clip_gradients, pick_device, train
from .recipes import CPU_RECIPE, GPU_RECIPE, Recipe, recipe_for

__all__ = ["TrainConfig", "train", "pick_device", "clip_gradients", "Recipe", "CPU_RECIPE", "GPU_RECIPE", "recipe_for"]
