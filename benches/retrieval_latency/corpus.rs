//! The synthetic memories of the retrieval bench: word tables and the generators that
//! draw facts, rules and session summaries from them with a seeded [`Rng`], and the fixed
//! set of session-start prompts the clients ask. Data, not measurement: kept apart so that
//! the bench file reads as the measurement it is, and the same seed gives the same tenant.

use crate::support::Rng;

const PEOPLE: &[&str] = &[
    "user", "maria", "john", "emma", "leo", "sophie", "mom", "dad", "grandma", "the kids",
];
const THINGS: &[&str] = &[
    "the car",
    "the house",
    "the dog",
    "the garden",
    "the boat",
    "the laptop",
    "the apartment",
    "the bike",
];
const FOODS: &[&str] = &[
    "oatmeal with berries",
    "spicy ramen",
    "grilled salmon",
    "vegetable curry",
    "margherita pizza",
    "greek salad",
    "black coffee",
    "green tea",
    "lentil soup",
    "tacos al pastor",
    "sushi",
    "pancakes",
];
const MEALS: &[&str] = &[
    "breakfast",
    "lunch",
    "dinner",
    "a late snack",
    "weekend brunch",
];
const WEEKDAYS: &[&str] = &[
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const TIMES: &[&str] = &[
    "7:30 am", "8 am", "9:15 am", "10 am", "noon", "1:30 pm", "3 pm", "4:45 pm", "6 pm", "8 pm",
];
const DAYPARTS: &[&str] = &["morning", "afternoon", "evening", "night"];
const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const APPOINTMENTS: &[&str] = &[
    "dentist",
    "physiotherapy",
    "eye exam",
    "haircut",
    "vet",
    "tax advisor",
    "parent-teacher",
    "cardiology",
];
const ALLERGENS: &[&str] = &[
    "peanuts",
    "shellfish",
    "penicillin",
    "cat hair",
    "pollen",
    "lactose",
    "gluten",
];
const ACTIVITIES: &[&str] = &[
    "running by the river",
    "yoga",
    "playing chess",
    "swimming",
    "reading mystery novels",
    "cooking for friends",
    "cycling",
    "piano practice",
    "hiking",
    "board games",
];
const PLACES: &[&str] = &[
    "Lisbon",
    "Kyoto",
    "the lake cabin",
    "Barcelona",
    "the coast",
    "Vienna",
    "the national park",
    "Montreal",
];
const FAVOURITES: &[(&str, &[&str])] = &[
    ("color", &["blue", "green", "deep red", "yellow"]),
    ("band", &["Radiohead", "ABBA", "the Beatles", "Daft Punk"]),
    ("book", &["Dune", "Middlemarch", "The Hobbit", "Beloved"]),
    ("restaurant", &["Luigi's", "the noodle bar", "Casa Verde"]),
    ("movie", &["Spirited Away", "Casablanca", "Alien", "Amelie"]),
];
const BILLS: &[&str] = &[
    "electricity",
    "internet",
    "phone",
    "water",
    "rent",
    "insurance",
];
const MEDICATIONS: &[&str] = &[
    "vitamin D",
    "ibuprofen as needed",
    "blood pressure pills",
    "allergy tablets",
    "iron supplements",
];
const SERVICES: &[&str] = &[
    "an oil change",
    "a tire rotation",
    "a chimney inspection",
    "a vaccination",
    "a filter replacement",
    "a deep clean",
    "a software update",
    "a safety check",
];
const PARTS: &[&str] = &[
    "battery",
    "roof",
    "water heater",
    "brakes",
    "fence",
    "screen",
    "collar",
    "chain",
];
const INSURERS: &[&str] = &["Allianz", "State Farm", "AXA", "Zurich", "a local broker"];
const TAGS: &[&str] = &[
    "health", "food", "schedule", "family", "finance", "home", "travel", "hobby", "car", "pets",
];

/// "user" → "The user", "maria" → "Maria", "the car" → "The car".
fn display(subject: &str) -> String {
    let name = if subject == "user" {
        "the user"
    } else {
        subject
    };
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// One fact: its subject, a predicate stem (made unique by the caller), the text, a tag.
pub fn fact_text(rng: &mut Rng) -> (&'static str, &'static str, String, &'static str) {
    if rng.below(4) == 0 {
        let thing = *rng.pick(THINGS);
        let t = display(thing);
        return match rng.below(3) {
            0 => (
                thing,
                "maintenance",
                format!(
                    "{t} needs {} every {} months",
                    rng.pick(SERVICES),
                    rng.below(11) + 2
                ),
                "home",
            ),
            1 => (
                thing,
                "repair",
                format!(
                    "{t} had its {} replaced in {}",
                    rng.pick(PARTS),
                    rng.pick(MONTHS)
                ),
                "home",
            ),
            _ => (
                thing,
                "insurance",
                format!(
                    "{t} is insured with {} until {}",
                    rng.pick(INSURERS),
                    rng.pick(MONTHS)
                ),
                "finance",
            ),
        };
    }
    let person = *rng.pick(PEOPLE);
    let p = display(person);
    match rng.below(9) {
        0 => (
            person,
            "food_preference",
            format!("{p} prefers {} for {}", rng.pick(FOODS), rng.pick(MEALS)),
            "food",
        ),
        1 => (
            person,
            "appointment",
            format!(
                "{p} has a {} appointment on {} at {}",
                rng.pick(APPOINTMENTS),
                rng.pick(WEEKDAYS),
                rng.pick(TIMES)
            ),
            "schedule",
        ),
        2 => (
            person,
            "allergy",
            format!("{p} is allergic to {}", rng.pick(ALLERGENS)),
            "health",
        ),
        3 => (
            person,
            "hobby",
            format!(
                "{p} enjoys {} on {} {}s",
                rng.pick(ACTIVITIES),
                rng.pick(WEEKDAYS),
                rng.pick(DAYPARTS)
            ),
            "hobby",
        ),
        4 => (
            person,
            "wake_time",
            format!(
                "{p} usually wakes up at {} on {}s",
                rng.pick(TIMES),
                rng.pick(WEEKDAYS)
            ),
            "schedule",
        ),
        5 => {
            let (what, options) = *rng.pick(FAVOURITES);
            (
                person,
                "favourite",
                format!("{p}'s favourite {what} is {}", rng.pick(options)),
                "hobby",
            )
        }
        6 => (
            person,
            "travel_wish",
            format!(
                "{p} mentioned wanting to visit {} in {}",
                rng.pick(PLACES),
                rng.pick(MONTHS)
            ),
            "travel",
        ),
        7 => (
            person,
            "bill",
            format!(
                "{p} pays the {} bill on day {} of each month",
                rng.pick(BILLS),
                rng.below(28) + 1
            ),
            "finance",
        ),
        _ => (
            person,
            "medication",
            format!(
                "{p} takes {} every {}",
                rng.pick(MEDICATIONS),
                rng.pick(DAYPARTS)
            ),
            "health",
        ),
    }
}

const SITUATIONS: &[&str] = &[
    "the user asks about their schedule",
    "scheduling a meeting",
    "booking travel",
    "suggesting a recipe",
    "the user mentions feeling unwell",
    "a bill is due within three days",
    "planning a family dinner",
    "the user asks for a restaurant",
    "the car service is overdue",
    "a new appointment overlaps another one",
    "the user is travelling abroad",
    "writing an email on the user's behalf",
    "the kids have a school event",
    "recommending a book or movie",
    "the user asks to be reminded of something",
    "ordering groceries",
    "the weather forecast shows rain",
    "a medication refill is needed",
    "the user has not exercised for a week",
    "booking a doctor's appointment",
];
const ACTIONS: &[&str] = &[
    "check the calendar for conflicts first",
    "confirm the time zone before answering",
    "mention known allergies",
    "prefer morning slots",
    "ask before spending more than 100 euros",
    "keep the answer to three sentences",
    "offer two options instead of one",
    "use the metric system",
    "remind the user a day in advance",
    "avoid scheduling anything on Sunday",
    "copy Maria on the message",
    "suggest a vegetarian alternative",
    "double-check the address",
    "add the event to the shared family calendar",
    "summarise the cost before confirming",
    "write in a friendly, informal tone",
    "ask which of the kids it concerns",
    "note it in the weekly summary",
];

/// One rule: the text (a situation and what to do in it) and a tag.
pub fn rule_text(rng: &mut Rng) -> (String, &'static str) {
    let situation = rng.pick(SITUATIONS);
    let action = rng.pick(ACTIONS);
    let text = match rng.below(3) {
        0 => format!("When {situation}, {action}."),
        1 => format!("If {situation}, always {action}."),
        _ => format!("When {situation}, {action}, and never guess."),
    };
    (text, *rng.pick(TAGS))
}

const TASKS: &[&str] = &[
    "move the dentist appointment to a morning slot",
    "find a dinner recipe without peanuts",
    "book train tickets to Vienna",
    "pay the electricity bill",
    "plan a birthday party for Emma",
    "compare car insurance offers",
    "schedule the car's oil change",
    "find a yoga class near the office",
    "summarise the week's appointments",
    "order groceries for the weekend",
    "draft an email to the landlord about the water heater",
    "choose a movie for family night",
    "reschedule the vet visit for the dog",
    "set up a reminder for blood pressure pills",
    "plan a hiking trip to the national park",
];
const OUTCOMES: &[&str] = &[
    "The butler confirmed it and updated the calendar",
    "The user changed their mind halfway and asked for options",
    "It was done, but the user wants a reminder next time",
    "It could not be finished because a detail was missing",
    "The butler suggested two alternatives and the user picked the first",
    "The user was happy with the result",
];
const FOLLOW_UPS: &[&str] = &[
    "check again next week",
    "ask Maria for her preference",
    "confirm the booking by email",
    "none",
    "remind the user on the day before",
    "look for a cheaper option",
];

/// One session summary, numbered `i`: who asked for what, how it went, what follows.
pub fn episode_text(rng: &mut Rng, i: usize) -> String {
    let (weekday, daypart, person) = (*rng.pick(WEEKDAYS), *rng.pick(DAYPARTS), *rng.pick(PEOPLE));
    format!(
        "Session summary #{i} ({} {}): {} asked the butler to {}. {}. Follow-up: {}.",
        weekday,
        daypart,
        display(person),
        rng.pick(TASKS),
        rng.pick(OUTCOMES),
        rng.pick(FOLLOW_UPS)
    )
}

/// Session-start prompts; every request draws one of these.
pub const PROMPTS: &[&str] = &[
    "What's on my calendar tomorrow?",
    "Remind me what Maria likes for dinner",
    "Book a dentist appointment for next week",
    "Plan a healthy breakfast for the kids",
    "When is the car due for its next service?",
    "Is anyone in the family allergic to peanuts?",
    "Help me plan a trip to Lisbon",
    "Which bills are due this month?",
    "What time does John usually wake up on Mondays?",
    "Find a restaurant for Saturday evening",
    "Schedule a meeting with the tax advisor",
    "What medication does grandma take?",
    "Suggest a weekend activity for the whole family",
    "When is the vet appointment for the dog?",
    "What did we decide about the house insurance?",
    "Order groceries for the week",
    "Draft an email to the landlord",
    "What's Emma's favourite book?",
    "Recommend a movie for family night",
    "Does the garden need anything this month?",
    "Remind me to pay the internet bill",
    "What hobbies does Leo have?",
    "Plan dinner for six people on Friday",
    "What happened in our last session?",
    "Reschedule my physiotherapy appointment",
    "Is the laptop due for a software update?",
    "Where did Sophie want to travel this year?",
    "What does mom prefer for lunch?",
    "Set up a reminder for dad's blood pressure pills",
    "Find a yoga class on Tuesday mornings",
    "What's the plan for the kids' school event?",
    "Compare insurance offers for the car",
    "What did the user ask about last week?",
    "Book train tickets to Vienna",
    "Is there anything I should follow up on?",
    "What are the house maintenance tasks coming up?",
    "Suggest a vegetarian recipe",
    "Who is allergic to shellfish?",
    "Plan a hiking trip to the national park",
    "What time is my haircut?",
    "Summarise this week's appointments",
    "What's Maria's favourite color?",
    "When does the boat insurance expire?",
    "Help me choose a birthday gift for Emma",
    "What do I usually eat for breakfast?",
    "Check my schedule for conflicts on Thursday",
    "Which of the kids has a parent-teacher meeting?",
    "What did we say about spending limits?",
    "Is the bike due for a safety check?",
    "What should I cook for weekend brunch?",
    "Send a message to Maria about Sunday",
    "When did the car get new brakes?",
    "What's the rule for booking travel?",
    "Find a swimming pool open in the evening",
    "Remind me what grandma enjoys doing",
    "What is the user's preferred tone for emails?",
    "Any rules about scheduling on Sunday?",
    "How often does the dog need a vaccination?",
    "What was left unfinished in previous sessions?",
    "Plan a quiet evening at home",
];
