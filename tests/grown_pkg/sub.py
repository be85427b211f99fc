LOG: list = []
