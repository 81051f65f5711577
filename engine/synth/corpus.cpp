// Training text for the synthetic tokenizer: a few KB of varied plain English
// (prose, dialogue, numbers, lists, a little code and markup) so the learned merges
// look like a real BPE vocabulary: common words with a leading space, suffixes,
// punctuation runs, newlines. Written for this project; no external data.
#include "engine/synth/bpe_trainer.h"

namespace strata::synth {

namespace {

constexpr std::string_view kCorpus = R"CORPUS(The morning train left the station at seven o'clock, and by the time it reached the river the fog had lifted. Passengers folded their newspapers, looked out of the windows, and watched the water move slowly toward the sea. Nobody said much; it was the kind of quiet that comes before a long working day.

In the small town where I grew up, there was one bakery, one library, and one road that went in both directions. The library was open on Tuesdays and Thursdays from ten until four. My grandmother worked there for thirty-two years, and she knew the name of every person who walked through the door. She said that a good library is not about the books it keeps but about the questions it helps people ask.

"Are you coming with us?" asked Maria.
"I can't," said Tom. "I have to finish the report before Friday."
"You've been saying that all week."
"I know. I'm sorry. It's a long report, and the numbers don't add up yet."
"Then let's check them together tomorrow morning."

A language model reads text as a sequence of tokens. Each token is a small piece of text: a word, part of a word, a single character, or a byte. The model learns which token is likely to come next, given everything that came before. During training it sees billions of examples; during inference it predicts one token at a time, and each new token is added to the context for the next step.

Recipe for a simple tomato soup (serves 4):
1. Heat 2 tablespoons of olive oil in a large pot.
2. Add 1 chopped onion and 2 cloves of garlic; cook for 5 minutes.
3. Add 800 grams of tomatoes, 500 ml of water, and a pinch of salt.
4. Simmer for 20 minutes, then blend until smooth.
5. Serve hot with bread and a little fresh basil.

The history of science is full of ideas that seemed strange at first. People once believed that the sun moved around the earth, that heavy objects fall faster than light ones, and that illness was caused by bad air. Careful observation, measurement, and experiment slowly replaced these beliefs with better explanations. Science does not promise final answers; it promises a method for finding out when we are wrong.

Weather report: On Monday, temperatures will reach 18 degrees in the north and 24 degrees in the south. Expect light rain in the afternoon, with winds from the west at 15 to 20 kilometers per hour. Tuesday will be dry and sunny, while Wednesday brings a chance of thunderstorms late in the evening.

def count_words(text):
    counts = {}
    for word in text.split():
        word = word.lower().strip(".,!?;:")
        counts[word] = counts.get(word, 0) + 1
    return counts

if __name__ == "__main__":
    print(count_words("The cat sat on the mat. The mat was red."))

int main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) {
        printf("%d: %s\n", i, argv[i]);
    }
    return 0;
}

Dear Mr. Thompson,

Thank you for your letter of March 3rd. I am writing to confirm that your order has been shipped and should arrive within 5 to 7 working days. If you have any questions, please don't hesitate to contact our customer service team at the number below. We appreciate your business and hope you enjoy your new garden chairs.

Kind regards,
Susan Miller
Customer Relations

The old lighthouse stood at the edge of the cliff, its white paint peeling in long strips. For more than a hundred years it had warned ships away from the rocks below. Now the light was automatic, and the keeper's house was a small museum where children could climb the narrow stairs and look out over the grey water, imagining storms and shipwrecks and brave rescues in the night.

Questions and answers:
Q: What is the capital of France?
A: The capital of France is Paris.
Q: How many days are there in a leap year?
A: There are 366 days in a leap year.
Q: Why is the sky blue?
A: Sunlight is scattered by the molecules in the air, and blue light is scattered more than red light because it has a shorter wavelength.
Q: Who wrote "Pride and Prejudice"?
A: Jane Austen wrote it, and it was first published in 1813.

Good software is written for people first and computers second. A function should do one thing and do it well. Names should say what something is, not how it is stored. Comments should explain why a decision was made, because the code already shows what it does. Tests are not a burden; they are the safety net that lets you change the code without fear.

When the committee met on the 14th, it reviewed the budget for the coming year. Spending on roads increased by 12 percent, spending on schools by 8 percent, and spending on parks stayed the same. Several members asked whether the new bridge could be finished before winter. The engineer replied that the work was on schedule, but that heavy rain in October could delay it by two or three weeks.

She opened the box carefully. Inside, wrapped in old paper, was a small wooden bird with one wing missing. Her father had carved it when he was a boy, and he had given it to her on her sixth birthday. She had lost it years ago, or thought she had. Now, holding it again, she remembered the smell of sawdust in his workshop and the sound of the radio playing in the corner.

Travel notes, day 3: We walked from the harbour to the old market, about 4 km, stopping for coffee at a cafe near the church. The market sells fish, fruit, cheese, and hand-made baskets. Prices are marked in euros; a kilo of apples costs 2.50 and a loaf of bread about 1.80. In the afternoon we took the bus along the coast road to the next village, where the beach was almost empty.

How to change a bicycle tyre: First, remove the wheel from the frame. Let out any remaining air, then use two tyre levers to lift one side of the tyre over the rim. Pull out the old tube and check the inside of the tyre for sharp objects. Put in the new tube, push the tyre back onto the rim with your thumbs, and pump it up to the pressure printed on the side of the tyre.

Markets rise and fall for many reasons. Interest rates, company earnings, political events, and the general mood of investors all play a part. Over short periods prices can move in ways that seem random, but over longer periods they tend to follow the growth of the economy. Most advisers recommend spreading money across many different investments rather than trying to guess the next big winner.

<html>
  <head><title>Example page</title></head>
  <body>
    <p>Hello, world! This is a <b>simple</b> page.</p>
  </body>
</html>

{"name": "example", "version": "1.0.2", "tags": ["test", "demo"], "count": 42, "enabled": true}

The children played in the garden until the sun went down. Then their mother called them inside for dinner: rice, vegetables, and a little chicken, followed by apples from the tree at the end of the garden. After dinner they read stories, and one by one they fell asleep, the youngest first, still holding a book about a bear who could not find his way home.

It's important to remember that we're all learning. Nobody knows everything, and that's fine. If you don't understand something, ask; if you've made a mistake, say so and fix it. The people who learn fastest are usually not the ones who know the most, but the ones who aren't afraid to look foolish for a moment.

Café, naïve, résumé, and façade are English words borrowed from French; many writers keep the accents, others drop them. Prices were quoted in pounds (£12) and euros (€15) — both were accepted.

Numbers: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1000, 2024, 3.14159, 2.71828, 1/2, 3/4, 50%, 99.9%, +7, -3, 1e-6, 0x1F.
Dates: 2023-01-15, 12/31/1999, 1st of May, 22nd of June, the year 1969.
Times: 09:30, 12:00, 18:45, half past six, a quarter to nine.

Finally, a short poem:
The river runs beneath the hill,
the evening air is soft and still;
the lamps are lit along the street,
and home is where the roads all meet.
)CORPUS";

}  // namespace

std::string_view embedded_corpus() { return kCorpus; }

}  // namespace strata::synth
