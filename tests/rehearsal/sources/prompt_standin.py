# The rehearsal's stand-in of the structure of the CDV authors' utils/prompt.py: functions with the authors'
# parameter names, each returning one f-string, read by the workflow without running this file. The texts
# are this project's own; the reply formats are the authors' (Generated Distraction:, {"response": ...},
# {"final_answer": ...}, New question:).


def get_distraction(question=None, ori_question=None, ground_truth=None, wrong_answer=None, choices=None):
    return f"""Write one sentence of distracting background for the question below that nudges a reader
toward the option {wrong_answer} instead of {ground_truth}, without changing the question.
Question: {question}
Options: {choices}
Reply as Generated Distraction: <one sentence>"""


def check_question_semantic(question=None, ori_question=None, ground_truth=None, choices=None):
    return f"""Does the rewritten question keep the original's answer {ground_truth}?
Original: {ori_question}
Rewritten: {question}
Options: {choices}
Reason step by step, then reply {{"response": "Yes"}} or {{"response": "No"}}."""


def answer_question_dk(question=None, choices=None):
    return f"""Answer the multiple-choice question; think step by step, then name the option you choose.
Question: {question}
Options: {choices}"""


def answer_question_with_instruction(question=None, choices=None):
    return f"""Focus on the core question and ignore background that does not bear on it; think step by
step, then name the option you choose.
Question: {question}
Options: {choices}"""


def extract_answer_dk(question=None, answer=None, choices=None):
    return f"""Which option does the answer below choose? Options: {choices}
Question: {question}
Answer: {answer}
Reply as JSON: {{"final_answer": "<the option's text>"}}"""


def paraphrase_question(question=None, choices=None):
    return f"""Restate the question at length without changing its meaning or its answer.
Question: {question}
Options: {choices}
Reply as New question: <question>"""


def direct_perturbation(question=None, ori_question=None, ground_truth=None, wrong_answer=None, choices=None):
    return f"""Add distracting background to the question so that a reader picks {wrong_answer}.
Question: {question}
Options: {choices}
Reply as New question: <question>"""
