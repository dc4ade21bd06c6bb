"""The weights: how each matrix is held in memory, its products with activations, and the memory budget.

:mod:`~pyengine.weights.forms` has one class per weight form (float32, int8 by
blocks, int8 by rows and columns, packed, and the row split of "mixed"), all
with the same small interface; :mod:`~pyengine.weights.matmul` and
:mod:`~pyengine.weights.lanes` hold their products;
:mod:`~pyengine.weights.rows` reads a weight's rows from the file and
:mod:`~pyengine.weights.build` makes each form from them;
:mod:`~pyengine.weights.budget` picks the forms and says what they hold.
"""
