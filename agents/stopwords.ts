/**
 * Compact function-word lists for the languages the detector knows. The summarizer ignores these when
 * counting term frequency, so that "the", "der" or "le" never decide which sentences matter.
 */
const lists = {
  en: "a an and are as at be been but by can could did do does for from had has have he her his how i if in into is it its just may me more most my no not of on one or our out over she so some such than that the their them then there these they this those to too up us was we were what when where which while who will with would you your also after before about all any because being between both each few here own same should very",
  de: "aber alle als am an auch auf aus bei bin bis bist da damit dann das dass dem den der des die dies diese dir doch dort du durch ein eine einem einen einer eines er es für hat hatte hier ich ihr im in ist ja jede kann kein mich mir mit nach nicht noch nur ob oder ohne schon sehr sein seine sich sie sind so über um und uns unter vom von vor war was weil wenn werden wie wir wird wo zu zum zur",
  fr: "à au aux avec ce ces cette dans de des du elle elles en est et eux il ils je la le les leur leurs lui ma mais me même mes moi mon ne nos notre nous on ou où par pas pour qu que qui sa se ses son sont sur ta te tes toi ton tu un une vos votre vous y été être fait plus tout tous très",
  es: "a al algo como con de del el ella ellas ellos en entre era es esa ese eso esta este esto fue ha hay la las le les lo los más me mi muy no nos o para pero por que se sea si sin sobre son su sus también te tu un una uno unos y ya",
  it: "a ad al alla alle anche che chi ci come con da dal dalla dei del della delle di e è gli ha hanno i il in io la le lei lo loro lui ma mi ne nei nel nella noi non o per più quando questo questa se si sono su sua suo sue suoi tra tu un una uno",
  nl: "aan al als bij dan dat de der deze die dit door een en er haar heb heeft het hij hoe hun ik in is je kan maar me met mij na naar niet nog nu of om ons onze ook op over te tot u uit van veel voor was wat we wel werd wie wij worden zal ze zich zij zijn zo",
  pt: "a ao aos as até com como da das de do dos e é ela elas ele eles em entre era essa esse esta este eu foi há isso já la lhe mais mas me muito na não nas no nos o os ou para pela pelo por que se sem ser seu seus sua suas também te um uma umas uns",
} as const;

/** Every function word of every known language, lower case. */
export const stopwords: ReadonlySet<string> = new Set(
  Object.values(lists).flatMap((list) => list.split(" ")),
);
