//! The prompts of the own-trace test: each asks for a long answer that works through many steps
//! (calculations, programs with their explanation, plans, derivations), so that the later part of
//! the answer builds on what the model wrote earlier. Ids name the result files: a prompt's text
//! and id never change, new prompts go at the end.

pub const TRACE_PROMPTS: [(&str, &str); 24] = [
    (
        "word-problem",
        "A bakery sells bread at 3 dollars, croissants at 2 dollars and cakes at 15 dollars. On \
         Monday it sold 40 breads, 65 croissants and 4 cakes; each day from Tuesday to Saturday it \
         sold 10% more breads than the day before, 5 fewer croissants, and one more cake. Flour \
         costs 0.8 dollars per bread, 0.5 per croissant and 4 per cake, and rent is 120 dollars a \
         day. Work out, step by step and day by day, the revenue, the costs and the profit of each \
         day, then the totals for the week, then explain which product the bakery should promote \
         and why. Show every calculation.",
    ),
    (
        "program",
        "Write a complete Python program that reads a CSV file of bank transactions (date, \
         description, amount, category), validates every row, computes monthly totals per \
         category, detects unusual transactions with a z-score, and prints a formatted report. \
         Use functions with docstrings and type hints, handle errors carefully, and include unit \
         tests. Then explain, function by function, how the program works and why it is written \
         that way.",
    ),
    (
        "plan",
        "Plan a two-week study schedule for a student preparing for exams in mathematics, \
         physics, chemistry and history. For each day give the subjects, the topics, the hours, \
         the breaks and the exercises, explain the reasoning behind the order of topics, and end \
         with advice on sleep, food and revision techniques. Be detailed.",
    ),
    (
        "loan",
        "A family borrows 240,000 dollars for a house at 4.5% yearly interest over 25 years, paid \
         monthly. Derive the monthly payment formula and compute the payment. Then build the \
         amortisation table for the first 12 months (interest, principal, balance for each month), \
         compute the total interest paid over the whole loan, and compare it with a 15-year loan \
         at 3.9%. Show every step of every calculation.",
    ),
    (
        "inventory",
        "A warehouse starts the month with 500 chairs, 320 tables and 150 sofas. Every week it \
         receives 120 chairs, 60 tables and 25 sofas, and ships 35% of its chairs, 28% of its \
         tables and 40% of its sofas (rounded down). Storage costs 1.2 dollars per chair, 2.5 per \
         table and 6 per sofa per week. Track the stock of every item week by week for eight \
         weeks, with the shipments and the storage cost each week, then the totals, and explain \
         which item ties up the most money. Show every calculation.",
    ),
    (
        "linked-list",
        "Implement a doubly linked list in Python with insertion at both ends, insertion after a \
         given node, deletion, search, reversal in place, and iteration in both directions. Write \
         each method with type hints and a docstring, then write a test for each method, then walk \
         through a sequence of ten operations on an empty list, drawing the list after each one, \
         and finally discuss the complexity of every operation.",
    ),
    (
        "tournament",
        "Six teams (Ajax, Boreal, Comet, Delta, Echo and Falcon) play a round-robin football \
         tournament: every team plays every other once, a win gives 3 points, a draw 1. Invent a \
         plausible score for each of the 15 matches, list them round by round, then build the \
         league table after every round (played, won, drawn, lost, goals for and against, goal \
         difference, points), and explain the tie-breaks in the final table.",
    ),
    (
        "physics",
        "A ball is thrown from the top of a 45-metre cliff at 20 metres per second, 35 degrees \
         above the horizontal. Ignoring air resistance and taking g as 9.81, derive step by step \
         the time of flight, the maximum height, the horizontal distance, and the speed and angle \
         at impact. Then redo the whole calculation for launch angles of 15, 25, 45 and 55 \
         degrees, tabulate the results, and explain which angle gives the greatest distance and \
         why it is not 45 degrees here.",
    ),
    (
        "sql",
        "Design a relational database for a small library: books, authors, members, loans, \
         reservations and fines. Write the SQL to create every table with keys and constraints, \
         insert a few rows into each, then write ten queries (overdue loans, the most borrowed \
         authors, members with unpaid fines, and so on), explaining each query clause by clause \
         and the indexes that would make it fast.",
    ),
    (
        "sorting",
        "Explain merge sort, quicksort and heapsort. For each, write a Python implementation with \
         comments, then trace it by hand on the list [38, 27, 43, 3, 9, 82, 10, 55], showing the \
         list after every step, count the comparisons it made, and state its best, average and \
         worst case complexity with the reasoning. End by comparing the three algorithms.",
    ),
    (
        "budget",
        "A town of 18,000 people has a yearly budget of 24 million dollars: 38% schools, 21% \
         roads, 14% police, 9% parks, 11% health and the rest administration. Next year revenue \
         grows 3%, school costs grow 5%, road costs fall 2% and the council wants to add a 600,000 \
         dollar library. Work out every line of this year's budget, then next year's, find where \
         the library's money can come from in three different ways, and compute the per-resident \
         cost of each line in both years. Show every calculation.",
    ),
    (
        "recipe-scaling",
        "A recipe for 4 people uses 300 g of flour, 2 eggs, 250 ml of milk, 40 g of butter, 15 g \
         of sugar and 5 g of salt, and takes 25 minutes to cook. Scale it for 6, 10, 15 and 32 \
         people, rounding eggs sensibly, converting to cups and ounces as well, work out the cost \
         of each version from prices you state, and explain how cooking time and pan size change \
         with the amount. Show every calculation in a table for each size.",
    ),
    (
        "state-machine",
        "Write a Python class that models a vending machine as a state machine: idle, selecting, \
         paying, dispensing, giving change and out of order. Define every state and transition, \
         handle coins of 5, 10, 25 and 100 cents, compute change greedily, and refuse invalid \
         actions with clear errors. Then simulate five customers step by step, printing the state \
         and the money held after each action, and write unit tests for every transition.",
    ),
    (
        "genealogy",
        "Invent a family over four generations, starting from one couple born in 1920, with \
         names, birth years and professions for every person (at least 20 people). Describe each \
         generation, then answer in detail: who are the cousins of the youngest child, how old was \
         each grandparent when each grandchild was born, and which professions run in the family. \
         Check every age calculation explicitly.",
    ),
    (
        "matrix",
        "Solve the system 2x + 3y - z + w = 5, x - y + 2z - w = 1, 3x + y + z + 2w = 12, x + 2y - \
         3z + w = -2 by Gaussian elimination, writing the augmented matrix after every row \
         operation. Then compute the determinant of the coefficient matrix by cofactor expansion, \
         find its inverse, and verify the solution by substitution into every equation.",
    ),
    (
        "parser",
        "Write a recursive-descent parser and evaluator in Python for arithmetic expressions with \
         +, -, *, /, ^, unary minus, parentheses and variables. Give the grammar first, then the \
         tokenizer, the parser and the evaluator, with type hints and docstrings, then trace by \
         hand how it parses and evaluates 3 + 4 * (2 - x) ^ 2 / -y with x = 5 and y = 2, showing \
         the token list, the call stack and the tree, and finish with tests.",
    ),
    (
        "trip",
        "Plan a ten-day rail trip through Europe starting in Lisbon and ending in Vienna, with a \
         budget of 2,500 euros. For every day give the route, departure and arrival times, the \
         train cost, the hotel and its price, meals and sights, keep a running total of the money \
         spent after each day, and explain each choice. End with what to cut if the budget drops \
         to 2,000 euros.",
    ),
    (
        "population",
        "A lake holds 2,000 fish. Each year the population grows by 18% before fishing, the \
         fishing fleet catches 300 fish, and a disease kills 5% of what remains. Compute the \
         population year by year for 15 years, showing each step, then find the catch that keeps \
         the population stable, derive the long-run population algebraically for a catch of 250, \
         and discuss what happens if growth drops to 12%.",
    ),
    (
        "cache-design",
        "Implement an LRU cache in Python with get, put, delete, resize and statistics (hits, \
         misses, evictions), using a dictionary and a doubly linked list, with type hints and \
         docstrings. Then run by hand a sequence of 20 operations on a cache of capacity 4, \
         showing its contents in order after each operation and the statistics at the end, write \
         unit tests, and compare LRU with LFU and FIFO on the same sequence.",
    ),
    (
        "essay",
        "Write a long, structured essay on how the printing press changed Europe between 1450 \
         and 1650: its invention, the spread of presses city by city, the effects on religion, \
         science, language, politics and the economy, with dates, names and numbers. Give each \
         part a heading, refer back to earlier parts when you draw conclusions, and end with a \
         comparison to the internet.",
    ),
    (
        "payroll",
        "A company has eight employees with hourly rates of 18, 22, 25, 19, 31, 27, 16 and 40 \
         dollars who worked 38, 45, 40, 50, 42, 36, 44 and 41 hours this week. Overtime beyond \
         40 hours pays 1.5 times the rate; tax is 12% of the first 600 dollars and 22% of the \
         rest; a pension takes 5%. Compute every employee's gross pay, overtime, tax, pension and \
         net pay step by step, then the company totals, then redo the totals if overtime pays \
         twice the rate.",
    ),
    (
        "graph-search",
        "Describe breadth-first search, depth-first search, Dijkstra's algorithm and A*. Define a \
         weighted graph of ten cities with the distances between connected pairs, then run each \
         algorithm by hand from the first city to the last, showing the queue or stack and the \
         visited set at every step, give the path each finds and its cost, and implement all four \
         in Python with tests.",
    ),
    (
        "chemistry",
        "Balance the combustion equations of methane, ethane, propane, butane and octane, \
         explaining each balancing step. Then, for burning 1 kg of each fuel, compute the moles of \
         fuel, the oxygen needed, the carbon dioxide and water produced in grams, and the energy \
         released from standard enthalpies you state, tabulate everything, and explain which fuel \
         gives the most energy per kilogram of carbon dioxide.",
    ),
    (
        "story",
        "Write a long detective story in twelve short chapters. Introduce in the first chapter \
         six suspects with names, ages, professions and alibis for the night of the crime, give \
         clues in the middle chapters that refer back to those details, and in the last chapter \
         have the detective explain, clue by clue, why each suspect is innocent or guilty.",
    ),
];
