"""A small data analysis that runs inside a Cove sandbox (standard library only).

It simulates a month of orders for a few products, summarises revenue per product and writes
`report.csv` next to itself.
"""

import csv
import os
import random
import statistics

random.seed(7)
PRODUCTS = {"notebook": 4.5, "pen": 1.2, "backpack": 39.0, "lamp": 24.9}

orders = []
for day in range(1, 31):
    for product, price in PRODUCTS.items():
        quantity = max(0, int(random.gauss(20 if price < 10 else 4, 3)))
        orders.append((day, product, quantity, round(quantity * price, 2)))

rows = []
for product in PRODUCTS:
    revenue = [o[3] for o in orders if o[1] == product]
    units = sum(o[2] for o in orders if o[1] == product)
    rows.append({
        "product": product,
        "units": units,
        "revenue": round(sum(revenue), 2),
        "mean_daily_revenue": round(statistics.mean(revenue), 2),
        "stdev_daily_revenue": round(statistics.stdev(revenue), 2),
    })
rows.sort(key=lambda r: r["revenue"], reverse=True)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.csv")
with open(out, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)

print(f"analysed {len(orders)} orders of {len(PRODUCTS)} products; wrote {out}")
